"""Project-wide pytest configuration: the plugin's own tests drive real sessions with pytester."""

pytest_plugins = ["pytester"]
