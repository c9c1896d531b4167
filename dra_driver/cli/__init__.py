"""The user CLI ``dra-gpu`` (also ``kubectl dra-gpu``)."""
