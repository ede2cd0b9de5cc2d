.venv/bin/python benchmarks/tablestore_read.py                               # 20k and 100k records, 3 repeats
.venv/bin/python benchmarks/tablestore_read.py --sizes 5000,20000 --repeat 1  # a quick look
