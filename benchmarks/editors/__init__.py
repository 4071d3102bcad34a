"""What editors send to a server, over HTTP: llama.vim's /infill and instruct requests
(:mod:`.llama_vim`) and a user typing with llama.vim, its requests replayed on each server
(:mod:`.llama_vim_session`), against llama-server and `plookup serve`, each started in a process
of its own. A client of any server, run from a checkout (``python -m benchmarks.editors``): not
part of the installed package."""
