"""`python3 -m composer.gateway`: run the gateway server."""

import sys

from composer.gateway.server import main

sys.exit(main())
