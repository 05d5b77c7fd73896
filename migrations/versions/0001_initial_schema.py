"""initial schema

Revision ID: 0001
Revises:
Create Date: 2026-11-29 11:24:24.283565
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "cases",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("key", sa.String(length=32), nullable=False),
        sa.Column("kernel", sa.String(length=64), nullable=False),
        sa.Column("suite", sa.String(length=32), nullable=False),
        sa.Column("name", sa.String(length=256), nullable=False),
        sa.Column("params", sa.JSON(), nullable=False),
        sa.Column("b", sa.Integer(), nullable=True),
        sa.Column("h", sa.Integer(), nullable=True),
        sa.Column("sq", sa.Integer(), nullable=True),
        sa.Column("sk", sa.Integer(), nullable=True),
        sa.Column("d", sa.Integer(), nullable=True),
        sa.Column("layout", sa.String(length=8), nullable=True),
        sa.Column("mode", sa.String(length=8), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_cases")),
        sa.UniqueConstraint("key", name=op.f("uq_cases_key")),
    )
    with op.batch_alter_table("cases", schema=None) as batch_op:
        batch_op.create_index("ix_cases_suite_kernel", ["suite", "kernel"], unique=False)

    op.create_table(
        "runner_tokens",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("runner", sa.String(length=128), nullable=False),
        sa.Column("token_hash", sa.String(length=128), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("revoked_at", sa.DateTime(), nullable=True),
        sa.Column("last_used_at", sa.DateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_runner_tokens")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_runner_tokens_token_hash")),
    )
    with op.batch_alter_table("runner_tokens", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_runner_tokens_runner"), ["runner"], unique=False)

    op.create_table(
        "stacks",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=True),
        sa.Column("schema_version", sa.Integer(), nullable=False),
        sa.Column("keys", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_stacks")),
        sa.UniqueConstraint("digest", name=op.f("uq_stacks_digest")),
    )
    op.create_table(
        "builds",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("stack_id", sa.Integer(), nullable=False),
        sa.Column("backend", sa.String(length=16), nullable=False),
        sa.Column("source_hash", sa.String(length=64), nullable=False),
        sa.Column("git_commit", sa.String(length=64), nullable=True),
        sa.Column("git_dirty", sa.Boolean(), nullable=False),
        sa.Column("compiler", sa.String(length=256), nullable=False),
        sa.Column("compiler_version", sa.Text(), nullable=False),
        sa.Column("flags", sa.JSON(), nullable=False),
        sa.Column("artifact_hash", sa.String(length=64), nullable=False),
        sa.Column("compile_only", sa.Boolean(), nullable=False),
        sa.Column("stats", sa.JSON(), nullable=False),
        sa.Column("inject", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(["stack_id"], ["stacks.id"], name=op.f("fk_builds_stack_id_stacks")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_builds")),
        sa.UniqueConstraint(
            "stack_id", "backend", "artifact_hash", name=op.f("uq_builds_stack_id_backend_artifact_hash")
        ),
    )
    op.create_table(
        "runs",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("stack_id", sa.Integer(), nullable=False),
        sa.Column("build_id", sa.Integer(), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("trigger", sa.String(length=32), nullable=False),
        sa.Column("is_drill", sa.Boolean(), nullable=False),
        sa.Column("backend", sa.String(length=16), nullable=False),
        sa.Column("kernel_commit", sa.String(length=64), nullable=True),
        sa.Column("source_hash", sa.String(length=64), nullable=True),
        sa.Column("suites", sa.JSON(), nullable=False),
        sa.Column("runner", sa.String(length=128), nullable=True),
        sa.Column("hostname", sa.String(length=256), nullable=True),
        sa.Column("pid", sa.Integer(), nullable=True),
        sa.Column("host", sa.JSON(), nullable=False),
        sa.Column("ci", sa.JSON(), nullable=False),
        sa.Column("gpu_state", sa.JSON(), nullable=False),
        sa.Column("summary", sa.JSON(), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("origin", sa.String(length=16), nullable=False),
        sa.Column("started_at", sa.DateTime(), nullable=False),
        sa.Column("finished_at", sa.DateTime(), nullable=True),
        sa.ForeignKeyConstraint(["build_id"], ["builds.id"], name=op.f("fk_runs_build_id_builds")),
        sa.ForeignKeyConstraint(["stack_id"], ["stacks.id"], name=op.f("fk_runs_stack_id_stacks")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_runs")),
    )
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.create_index("ix_runs_stack_started", ["stack_id", "started_at"], unique=False)

    op.create_table(
        "gate_decisions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("baseline_run_id", sa.String(length=32), nullable=False),
        sa.Column("candidate_run_id", sa.String(length=32), nullable=False),
        sa.Column("verdict", sa.String(length=16), nullable=False),
        sa.Column("exit_code", sa.Integer(), nullable=False),
        sa.Column("report", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["baseline_run_id"], ["runs.id"], name=op.f("fk_gate_decisions_baseline_run_id_runs")
        ),
        sa.ForeignKeyConstraint(
            ["candidate_run_id"], ["runs.id"], name=op.f("fk_gate_decisions_candidate_run_id_runs")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_gate_decisions")),
    )
    op.create_table(
        "regressions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("case_id", sa.Integer(), nullable=False),
        sa.Column("stack_id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("metric", sa.String(length=64), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("first_run_id", sa.String(length=32), nullable=False),
        sa.Column("baseline_run_id", sa.String(length=32), nullable=True),
        sa.Column("last_run_id", sa.String(length=32), nullable=False),
        sa.Column("magnitude", sa.Float(), nullable=True),
        sa.Column("p_value", sa.Float(), nullable=True),
        sa.Column("details", sa.JSON(), nullable=False),
        sa.Column("note", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.Column("resolved_at", sa.DateTime(), nullable=True),
        sa.ForeignKeyConstraint(
            ["baseline_run_id"], ["runs.id"], name=op.f("fk_regressions_baseline_run_id_runs")
        ),
        sa.ForeignKeyConstraint(["case_id"], ["cases.id"], name=op.f("fk_regressions_case_id_cases")),
        sa.ForeignKeyConstraint(["first_run_id"], ["runs.id"], name=op.f("fk_regressions_first_run_id_runs")),
        sa.ForeignKeyConstraint(["last_run_id"], ["runs.id"], name=op.f("fk_regressions_last_run_id_runs")),
        sa.ForeignKeyConstraint(["stack_id"], ["stacks.id"], name=op.f("fk_regressions_stack_id_stacks")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_regressions")),
    )
    with op.batch_alter_table("regressions", schema=None) as batch_op:
        batch_op.create_index("ix_regressions_state_case", ["state", "case_id"], unique=False)

    op.create_table(
        "results",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.String(length=32), nullable=False),
        sa.Column("case_id", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=8), nullable=False),
        sa.Column("value", sa.Float(), nullable=True),
        sa.Column("metrics", sa.JSON(), nullable=False),
        sa.Column("device", sa.JSON(), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(["case_id"], ["cases.id"], name=op.f("fk_results_case_id_cases")),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name=op.f("fk_results_run_id_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_results")),
        sa.UniqueConstraint("run_id", "case_id", name=op.f("uq_results_run_id_case_id")),
    )
    with op.batch_alter_table("results", schema=None) as batch_op:
        batch_op.create_index("ix_results_case_run", ["case_id", "run_id"], unique=False)

    op.create_table(
        "samples",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("result_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("values", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(
            ["result_id"], ["results.id"], name=op.f("fk_samples_result_id_results"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_samples")),
        sa.UniqueConstraint("result_id", "name", name=op.f("uq_samples_result_id_name")),
    )


def downgrade() -> None:
    op.drop_table("samples")
    with op.batch_alter_table("results", schema=None) as batch_op:
        batch_op.drop_index("ix_results_case_run")

    op.drop_table("results")
    with op.batch_alter_table("regressions", schema=None) as batch_op:
        batch_op.drop_index("ix_regressions_state_case")

    op.drop_table("regressions")
    op.drop_table("gate_decisions")
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_index("ix_runs_stack_started")

    op.drop_table("runs")
    op.drop_table("builds")
    op.drop_table("stacks")
    with op.batch_alter_table("runner_tokens", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_runner_tokens_runner"))

    op.drop_table("runner_tokens")
    with op.batch_alter_table("cases", schema=None) as batch_op:
        batch_op.drop_index("ix_cases_suite_kernel")

    op.drop_table("cases")
