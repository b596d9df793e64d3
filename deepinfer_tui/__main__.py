from deepinfer_tui.cli import main

raise SystemExit(main())
