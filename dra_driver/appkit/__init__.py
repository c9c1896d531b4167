"""Plumbing every dra-gpu daemon shares: common flags with env defaults, stop signals."""
