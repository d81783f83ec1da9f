"""Run plumbing, read by every box: where things live (`paths`), JSON Lines (`jsonl`), parameter files into
Config dataclasses (`params`), the stage registry (`stages`), progress bars (`progress`), exact-resume checkpoints
(`checkpoints`) and hashes of the code that decides a score (`fingerprint`).

In: params/*.yaml, the repo's directories. Out: Configs, paths, files written atomically. Imports nothing of codelib
outside this folder.
"""
