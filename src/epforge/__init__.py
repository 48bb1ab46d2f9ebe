"""epforge controller-side tools: run the playbooks through ansible-runner and render reports from facts."""

__version__ = "0.1.0"
