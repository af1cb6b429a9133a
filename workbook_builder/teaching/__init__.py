"""The teacher edition: sheet languages, exercises, a class of students, grading, and the
tutorials' worked examples."""
