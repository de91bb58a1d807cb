"""retrieval"""
