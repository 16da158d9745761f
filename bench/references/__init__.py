"""What tidelog is measured against: the raw references (plain apsw on one SQLite file,
plain psycopg on PostgreSQL: the same job with no tidelog code) and the alternative
libraries users would pick instead, through their documented APIs.
"""
