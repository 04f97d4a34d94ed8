"""The `sparkscale` command line: the `main` group and the commands of each module registered on it.

One module per command group: daemon (run, check-config, status, actions, explain, blocklist,
scale-executors), cluster, pipeline, migrate, offline (plan, snapshot), placement (cluster-plan),
init (the config and units for this host), completion (bash and zsh) and the hidden docs (the
generated references of docs/).
Every command that reads config takes `--config` and `--set`. Other packages add commands through
the entry-point group `sparkscale.commands` (the lab's bench, report, demo, loadgen, verify and
simulate): they are listed by name and imported only when one of them runs.
"""

from __future__ import annotations

import importlib.metadata

import click

from sparkscale.cli import cluster, completion, daemon, docs, init, migrate, offline, pipeline, placement

PLUGIN_GROUP = "sparkscale.commands"


class _PluginGroup(click.Group):
    """A group whose plug-in commands are loaded on use: `--help` and every built-in command run
    without importing them (or what they need, such as matplotlib)."""

    def _plugins(self) -> dict[str, importlib.metadata.EntryPoint]:
        return {e.name: e for e in importlib.metadata.entry_points(group=PLUGIN_GROUP) if e.name not in self.commands}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *self._plugins()})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.commands:
            return self.commands[cmd_name]
        entry = self._plugins().get(cmd_name)
        if entry is None:
            return None
        try:
            command = entry.load()
        except ImportError as exc:
            raise click.ClickException(f"`{cmd_name}` comes from {entry.value} and needs what it imports: {exc} "
                                       "(pip install 'sparkscale[lab]')") from None
        if not isinstance(command, click.Command):
            raise click.ClickException(f"entry point {entry.name} = {entry.value} is not a click command")
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, command.get_short_help_str(limit=70)) for name, command in sorted(self.commands.items())
                if not command.hidden]
        rows += [(name, f"(plug-in: {entry.value.split(':')[0]})") for name, entry in sorted(self._plugins().items())]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=_PluginGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="sparkscale")  # the installed distribution's (importlib.metadata)
def main() -> None:
    """sparkscale: autoscaling for stateful Spark Structured Streaming pipelines."""


for _command in (
    daemon.check_config, daemon.run, daemon.status, daemon.actions, daemon.explain, daemon.blocklist,
    daemon.scale_executors,
    cluster.cluster,
    pipeline.pipeline,
    migrate.migrate_command,
    offline.plan_command, offline.snapshot_command,
    placement.cluster_plan_command,
    init.init_command, completion.completion_command,
    docs.docs,
):
    main.add_command(_command)
del _command
