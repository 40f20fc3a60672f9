"""The engine's side of a weight sync: verl's ``BucketedWeightReceiver`` and vLLM worker extension."""
