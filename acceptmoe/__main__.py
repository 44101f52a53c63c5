from acceptmoe.cli import main

raise SystemExit(main())
