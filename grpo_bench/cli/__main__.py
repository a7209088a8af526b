from grpo_bench.cli.entry import main

main()
