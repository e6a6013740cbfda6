"""``dcpsim calibrate`` as library functions: ``fit`` (profile tables → a calibration, written as JSON) and
``report`` (the fit's table of terms and its plot of measured against fitted curves). Nothing is re-exported
here."""
