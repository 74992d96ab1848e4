from autospeed.cli import entry

entry()
