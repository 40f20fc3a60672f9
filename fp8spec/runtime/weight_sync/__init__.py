"""The weight sync of the ``direct_sync`` patch (spec: ``linear.sync_quantizer: direct``, or ``auto`` where shown):
the trainer's side of verl's bucket transfer (``sender/``) and the engine's (``receiver/``), and the bucket
metadata both read (``packed_meta``)."""
