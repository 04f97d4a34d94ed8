from sparkscale.daemon.cli import main

main()
