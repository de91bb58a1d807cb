"""data/importers"""
