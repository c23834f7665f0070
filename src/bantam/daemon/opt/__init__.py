"""Opt-in add-ons (daemon/opt/): `"opt": ["tools/nudge"]` in config.json copies
opt/tools/nudge.py into the agent directory at first boot; from then on the agent owns its copy.

A tool file declares `TOOLS = [(NAME, fn, description, parameters)]` with `fn(args, agent) -> str`.
A provider file declares `make_provider(cfg) -> Provider`. These files are read from disk, not
imported as part of bantam."""
