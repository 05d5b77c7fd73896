"""CLI subcommands, one module per area; each module exports COMMANDS (a list of click commands).

Commands return an exit code through `ctx.exit(code)` and raise regress.facts.errors.UserError for bad input.
"""
