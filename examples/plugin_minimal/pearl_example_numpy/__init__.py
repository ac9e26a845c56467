"""A minimal PEARL backend plugin, written as a third party would write one."""
