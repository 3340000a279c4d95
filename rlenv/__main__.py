from rlenv.cli import main

main()
