"""What the commands write: terminal tables (``tables``), Chrome traces (``chrome_trace``), progress bars on
stderr (``progress``)."""
