from repokit.cli.main import run

run()
