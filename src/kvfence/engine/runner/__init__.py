"""Running the network: the model over the paged pool, and where its weights come from.

- ``model_runner.py``: batch preparation, scrubbing of handed-over pages (I2), the forward pass;
- ``loader.py``, ``model_path.py``, ``dtype_names.py``: local Hugging Face checkpoints, no hub access;
- ``default_model.py``: the built-in RANDOM-WEIGHT default model, built locally and labelled as such.
"""
