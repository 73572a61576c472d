"""A stored study, read: its storage opened to read (load), its trials as typed records (history),
and what they say: the chosen configuration (chosen), the gain's bound (bound), memory learned
from measurement (peaks) and what will not run (predict). The search decides with these and the
report shows them; nothing here imports the search or the report."""
