from grpo_bench.cli.commands import main

main()
