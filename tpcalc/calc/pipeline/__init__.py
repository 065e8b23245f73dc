"""Pipeline parallelism: stages, schedules, bubbles, stage-to-stage bytes."""
