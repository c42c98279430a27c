"""strategy"""
