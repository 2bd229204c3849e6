#!/usr/bin/env python3
"""Build the pipeline from a JSON config and run it locally or compile it for Vertex AI.

python pipeline.py --config configs/local.json
python pipeline.py --help
"""

import sys

from llm_pipeline.cli import main

if __name__ == "__main__":
    sys.exit(main())
