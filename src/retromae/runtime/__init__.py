"""The ground floor every other folder stands on: options, errors, files, output folders, the terminal and the
machine. Nothing here imports another folder of the package, and nothing here imports torch at module level.

Owns: `options` (typed configs: declaring an option with its domain, checking every field, argparse options, config
files, saving a config), `errors` (the exception types and the one-line form of an OS error), `io` (writing files
atomically), `cache_entries` (building a cache entry where other processes may build it too), `lines` (reading
line-based and JSON files with errors naming the file and line), `run_folder` (who owns an output folder, run
identities, `OutputOptions`), `console` (progress bars, stages, quiet libraries), `threads`, `cgroups`,
`cpu_features`, `processes` (the launch and the process state) and `devices` (`--device`). Does not own models,
data formats, training or any command.
"""
