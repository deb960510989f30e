"""capability"""
