from acceptmoe.experiments.cli import main

raise SystemExit(main())
