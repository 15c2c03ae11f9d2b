"""The GPU models gpupack knows: the catalog of models and MIG profiles (`catalog`), NVIDIA's placement rules
over it (`geometry`) and mig-parted's stock layouts (`stock`). Every other module asks these for a slice count."""
