"""generators/images"""
