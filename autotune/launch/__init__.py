"""Starting and supervising a trial: the fresh, supervised process or rank group (process), the
processes started ahead (prestart), what escapes a trial ended (orphans), the device locks (locks),
the bounded log (logcap), the one function that measures (runner) and user code checked in a
throwaway process (probe). The trial process itself is autotune/workloads; nothing here runs in it.
"""
