python benchmarks/apply_window.py --deferred --sizes 100000,1000000 --windows 5 --repeat 3
python benchmarks/apply_window.py --deferred --sizes 100000,1000000,10000000 --windows 5 --repeat 1
