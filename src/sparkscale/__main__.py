from sparkscale.cli import main

main()
