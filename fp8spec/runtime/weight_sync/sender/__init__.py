"""The trainer's side of a weight sync: verl's ``BucketedWeightSender`` filling and sending each bucket."""
