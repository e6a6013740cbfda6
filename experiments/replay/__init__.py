"""Replay measured training runs through dcpsim: the run-log format, importers (DistCA, Megatron-LM
functional tests), the replay itself, its error statistics and the fit of a calibration to measured steps."""
