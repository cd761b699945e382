"""The core: the option table (every option of a run, its type and its one default), targets, spaces,
cases, dtypes, includes, keys, the params file and where it is, git queries, discovery, errors, and
the one helper of each kind (atomic writes, text formatting, redaction, launch arithmetic, the
built-in names).

May import: nothing else of the package (and never pytest). A production call needs only this
layer, the backends, the measurement layer's kernel handle and the call layer.
"""
