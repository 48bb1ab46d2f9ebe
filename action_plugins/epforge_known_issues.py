"""epforge_known_issues reads nothing on the host: it runs in the controller's worker.

See epforge_controller_side.py; the module in library/ holds the rule, its docs and its argument_spec.
"""

from ansible.plugins.loader import action_loader

ActionModule = action_loader.get("epforge_controller_side", class_only=True)
