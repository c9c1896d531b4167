"""File adapters: atomic writes, CDI spec files, the checkpoint file, the cross-process lock."""
