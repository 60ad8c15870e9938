"""Paper reproductions: one recipe per figure or table (``dpfl reproduce 000/fig5``).

A recipe builds the runs of a figure (a sweep of validated configs, at a chosen scale), and
writes the figure (PNG) and a markdown report with our numbers next to the paper's stated
values or trends, read only from the run store. Recipes live in one module per paper, named for
the system it reproduces (``udp_crd`` 000, ``ldp_fl`` 001, ``pmidp_fl`` 002, ``nbafl`` 003,
``dp_fedavg_blur_lus`` 004), each exposing ``RECIPES: list[Recipe]``.
"""

from dpfl.experiments.recipes.base import Recipe, RecipeRun, ReportContext, all_recipes, get_recipe

__all__ = ["Recipe", "RecipeRun", "ReportContext", "all_recipes", "get_recipe"]
