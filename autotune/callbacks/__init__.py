"""Ready callbacks that report a training job's optimizer steps to autotune (task command): hf
(transformers.Trainer), lightning."""
