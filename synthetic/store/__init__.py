"""The results store: runs written atomically with completion records, tables, failures, locks.

It knows no config class: a run frame describes itself (config columns before ``run_key``, its
``epochs`` / ``eval_every`` say which epochs a complete run records), so the real-data runs use
the same store.

* :mod:`synthetic.store.schema` -- the table layout, recorded epochs, ``class_means`` cells;
* :mod:`synthetic.store.keys` -- the canonical run key;
* :mod:`synthetic.store.folders` -- the folder on disk, the one atomic write, writability;
* :mod:`synthetic.store.runs` -- run files with their completion records, checks, quarantine;
* :mod:`synthetic.store.tables` -- ``table.csv``, trusted only while its record matches;
* :mod:`synthetic.store.failures` -- failure records; :mod:`synthetic.store.locking` -- one
  writer per folder; :mod:`synthetic.store.errors` -- the store's exceptions;
* :mod:`synthetic.store.read` -- reading one grid folder or many for claims and figures;
* :mod:`synthetic.store.summary` -- final-epoch metrics, mean ± std over seeds.
"""
