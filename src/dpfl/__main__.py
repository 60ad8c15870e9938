import sys

from dpfl.cli import main

sys.exit(main())
