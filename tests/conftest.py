import sys, os; sys.path.insert(0, os.path.dirname(os.path.dirname(__file__)))
