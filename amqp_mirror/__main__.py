"""`python -m amqp_mirror` is the `amqp-mirror` command."""

import sys

from amqp_mirror.cli import main

sys.exit(main())
