"""dra-gpu core library: device model, attribute schema, GPU sources, MIG and sharing backends, CDI, checkpoint, config.

Rings (enforced by import-linter, see .importlinter):
  * ``dra_driver.core``     pure logic, no I/O;
  * ``dra_driver.sources``, ``dra_driver.mig_backends``, ``dra_driver.sharing_backends``,
    ``dra_driver.kube``, ``dra_driver.files``                          adapters;
  * ``dra_driver.cli``, ``controller``, ``kubelet_plugin``             apps.
"""
