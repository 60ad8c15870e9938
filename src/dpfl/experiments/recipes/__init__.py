"""Paper reproductions: one recipe per figure or table (``dpfl reproduce 000/fig5``).

A recipe builds the runs of a figure (a sweep of validated configs, at a chosen scale), and
writes the figure (PNG) and a markdown report with our numbers next to the paper's stated
values or trends, read only from the run store. Recipes live in one module per paper
(``p000`` … ``p004``), each exposing ``RECIPES: list[Recipe]``.
"""

from dpfl.experiments.recipes.base import Recipe, RecipeRun, ReportContext, all_recipes, get_recipe

__all__ = ["Recipe", "RecipeRun", "ReportContext", "all_recipes", "get_recipe"]
