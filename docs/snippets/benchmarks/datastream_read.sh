.venv/bin/python benchmarks/datastream_read.py                                   # 100k and 1M events, 5 repeats
.venv/bin/python benchmarks/datastream_read.py --sizes 100000,1000000 --repeat 3 --database mysql
