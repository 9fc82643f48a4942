"""clusterforge Pulumi program and its components (AWS and Kubernetes).

``pulumi up`` runs :mod:`stacks.__main__` (``Pulumi.yaml`` says ``main: stacks/``). The program
reads one stack setting, ``clusterforge:blueprint`` (:mod:`stacks.config`), loads and checks the
blueprint, and composes the ComponentResources in :mod:`stacks.components`. Every resource name
and tag comes from :mod:`blueprints.naming`; node user data comes from :mod:`stacks.cloud_init`,
which renders :func:`blueprints.settings.node_settings` (the same model the Ansible roles use).

``clusterforge plan`` runs the very same ``__main__`` in-process against a mock engine
(:mod:`clusterforge.plan`), so everything here must stay free of side effects outside Pulumi.
"""
