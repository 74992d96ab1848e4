from autospeed.cli import main

raise SystemExit(main())
