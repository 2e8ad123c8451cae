"""Delay levels (SCHEDULE_TOPIC_XXXX) and their delivery."""
