"""``dcpsim sweep``: a grid of scenario fields × seeds × policies, run in parallel, resumable.

grid (the sweep file parsed, its tasks) → task (one point × policy, what a worker runs) → pool / ray (the
backends) → store (one record per task) → driver (what runs, what is reused) → results (the tables);
keys hashes what a stored result depends on. Nothing is re-exported here: import from the module.
"""
