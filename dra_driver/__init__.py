"""dra-gpu core library: device model, attribute schema, GPU sources, CDI, checkpoint, config.

Rings (enforced by import-linter, see .importlinter):
  * ``dra_driver.core``     pure logic, no I/O;
  * ``dra_driver.sources``, ``dra_driver.kube``, ``dra_driver.files``  adapters;
  * ``dra_driver.cli``, ``controller``, ``kubelet_plugin``             apps.
"""
