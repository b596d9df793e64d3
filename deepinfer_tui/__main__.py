from deepinfer_tui.launch import main

raise SystemExit(main())
